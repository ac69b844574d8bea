// Lesson 09 — the flash attention backward in Triton (attention_bwd_triton.py), compiled ahead of time.
//
//   triton   op attention_bwd, bf16 and f16, head dims 64 and 128, causal and not: v2_mma_deterministic's
//            algorithm in Triton, three kernels: D = rowsum(dO ⊙ O) and L in base 2 into the
//            workspace; dK and dV by a program that holds BN keys of one K/V head and walks the
//            query tiles of every head of its group that see them (Sᵀ, Pᵀ, dV += Pᵀ·dO, dPᵀ,
//            dSᵀ, dK += dSᵀ·Q: four tl.dot a tile, wgmma on Hopper, P and dS from registers);
//            dQ by a program that holds BM query rows and walks their key tiles (the forward's
//            shape: S and dP recomputed, dQ += dS·K). No atomics: every sum in a fixed order.
//            Causal tiles that see nothing skipped, the mask only on the tiles that need it;
//            four linked pairs of tile configurations (dK/dV, dQ) a head dim, the fastest
//            chosen per shape (run_attention_bwd_triton)
//
// The build links the configurations of each kernel, dtype and head dim into one launcher
// (tr_attention_bwd_dkdv_bf16_d128(stream, ..., algo_id), tr_attention_bwd_dq_bf16_d128, and the
// preprocess's tr_attention_bwd_pre_bf16_d128, one configuration). A candidate is one dK/dV and
// one dQ configuration, the whole backward: the first call for a shape times those that fit
// the device's shared memory and caches the fastest (klab::autotune, as the forward's `triton`
// does). `klab test` verifies every candidate and launches each twice (the impl promises the
// same bits run after run: Impl::deterministic); `--candidate dkv128x32/8w/2st+dq128x64/8w/2st`
// runs one, `--candidate all` times each as its own row (the sweep).
//
//   klab test 09 --op attention_bwd --impl triton
//   klab bench 09 --op attention_bwd --impl triton --candidate all
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
#include "attention_bwd_triton.h"
#endif

// The op (inputs, reference, tolerances, shapes): attention_bwd_ops.cu.

namespace lesson09 {
namespace {

// The candidates of each head dim: CONFIGS[D] in attention_bwd_triton.py, in its order, as
// dkvBNxBM/warps/stages+dqBMxBN/warps/stages (tests/triton_algo_order.py compares the two
// lists). Both dtypes link the same lists. Each launcher numbers its kernel's distinct
// configurations in order of first appearance (distinct() in the .py); algo_of below does
// the same over these names, and run_attention_bwd_triton checks the counts.
const std::vector<std::string> kBwdTritonNamesD64 = {
    "dkv128x64/8w/3st+dq128x64/8w/3st", "dkv64x64/4w/3st+dq64x64/4w/3st", "dkv128x32/8w/3st+dq128x32/4w/3st",
    "dkv64x32/4w/3st+dq64x32/4w/3st"};
const std::vector<std::string> kBwdTritonNamesD128 = {
    "dkv128x32/8w/2st+dq128x64/8w/2st", "dkv64x32/4w/3st+dq64x64/4w/3st", "dkv128x64/8w/2st+dq128x32/8w/3st",
    "dkv64x16/4w/3st+dq64x32/4w/3st"};

const std::vector<std::string>& bwd_triton_names(std::int64_t d) {
  return d == 64 ? kBwdTritonNamesD64 : kBwdTritonNamesD128;
}

// One kernel's half of a candidate's name: part 0 the dK/dV configuration, 1 the dQ one.
std::string half_of(const std::string& name, int part) {
  const std::size_t plus = name.find('+');
  KLAB_REQUIRE(plus != std::string::npos, "triton attention_bwd: malformed configuration name " + name);
  return part == 0 ? name.substr(0, plus) : name.substr(plus + 1);
}

// The distinct configurations of one kernel over a head dim's candidates, in order of first
// appearance: its launcher's algo_ids.
std::vector<std::string> distinct_halves(const std::vector<std::string>& names, int part) {
  std::vector<std::string> out;
  for (const auto& n : names)
    if (std::find(out.begin(), out.end(), half_of(n, part)) == out.end()) out.push_back(half_of(n, part));
  return out;
}

int algo_of(const std::vector<std::string>& names, const std::string& name, int part) {
  const std::vector<std::string> all = distinct_halves(names, part);
  return static_cast<int>(std::find(all.begin(), all.end(), half_of(name, part)) - all.begin());
}

// The shared memory a candidate takes, its larger kernel's (they run one after the other):
// what Triton allocated for every entry on sm_90 (tools/triton_ptx.py; sm_80's is never
// larger), 2 bytes a 16-bit element, 4 an fp32 one:
//   dK/dV  K and V, num_stages buffers of a Q and a dO tile, num_stages - 1 of L2 and D
//   dQ     Q and dO, num_stages buffers of a K and a V tile
// 41 KB to 132 KB: the H100's 227 KB and the A100's 163 KB take them all, a GPU with less
// (an 8.6 device: 99 KB) only some.
std::size_t bwd_triton_smem_bytes(const std::string& name, std::int64_t d) {
  int kbn = 0, kbm = 0, kw = 0, kst = 0, qbm = 0, qbn = 0, qw = 0, qst = 0;
  KLAB_REQUIRE(std::sscanf(name.c_str(), "dkv%dx%d/%dw/%dst+dq%dx%d/%dw/%dst", &kbn, &kbm, &kw, &kst, &qbm, &qbn,
                           &qw, &qst) == 8,
               "triton attention_bwd: malformed configuration name " + name);
  const std::size_t D = static_cast<std::size_t>(d);
  const std::size_t dkv = 2 * static_cast<std::size_t>(kbn) * D * 2 + static_cast<std::size_t>(kst) * 2 * kbm * D * 2 +
                          static_cast<std::size_t>(kst - 1) * 2 * kbm * 4;
  const std::size_t dq = 2 * static_cast<std::size_t>(qbm) * D * 2 + static_cast<std::size_t>(qst) * 2 * qbn * D * 2;
  return std::max(dkv, dq);
}

// What the autotuner times for a problem, as Impl::candidates reports it: the head dim's
// candidates whose shared memory fits the device (without a GPU, all of them). A head dim
// with no kernel (supports() says no) lists d = 128's, so that every problem names its
// candidates.
std::vector<std::string> attention_bwd_triton_candidates(const klab::Problem& p) {
  const std::int64_t d = shape_of(p).d;
  const std::size_t limit = klab::device_info().smem_per_block_optin;
  std::vector<std::string> out;
  for (const auto& n : bwd_triton_names(d))
    if (limit == 0 || bwd_triton_smem_bytes(n, d == 64 ? 64 : 128) <= limit) out.push_back(n);
  return out;
}

// The workspace: D, then L in base 2, one float a query row each; the second array starts
// at a multiple of 32 floats (128 bytes), so that both are as aligned as the launchers'
// pointer hints say (*fp32:16).
i64 bwd_rows_padded(const klab::Problem& p) {
  const Shape s = shape_of(p);
  return (s.B * s.Hq * s.Sq + 31) / 32 * 32;
}

#if KLAB_HAVE_TRITON
using PreLauncher = CUresult (*)(CUstream, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, int64_t);
using DkvLauncher = CUresult (*)(CUstream, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr,
                                 CUdeviceptr, CUdeviceptr, CUdeviceptr, int32_t, int32_t, int32_t, int32_t, int32_t,
                                 int32_t, float, float, int);
using DqLauncher = CUresult (*)(CUstream, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr,
                                CUdeviceptr, CUdeviceptr, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, float,
                                float, int);

struct BwdKernels {
  PreLauncher pre;
  DkvLauncher dkv;
  int (*dkv_algos)(void);
  DqLauncher dq;
  int (*dq_algos)(void);
  void (*load_pre)(void);
  void (*load_dkv)(void);
  void (*load_dq)(void);
};

// The launchers: {bf16, f16} x {d = 64, d = 128}, index 2 * (dtype is f16) + (d is 128).
int bwd_kernel_index(const klab::Problem& p) {
  return 2 * (p.dtype == klab::DType::f16 ? 1 : 0) + (shape_of(p).d == 128 ? 1 : 0);
}

#define BWD_LAUNCHERS(dt, d)                                                                             \
  {tr_attention_bwd_pre_##dt##_d##d##_default, tr_attention_bwd_dkdv_##dt##_d##d,                           \
   tr_attention_bwd_dkdv_##dt##_d##d##_get_num_algos, tr_attention_bwd_dq_##dt##_d##d,                      \
   tr_attention_bwd_dq_##dt##_d##d##_get_num_algos, load_tr_attention_bwd_pre_##dt##_d##d,                  \
   load_tr_attention_bwd_dkdv_##dt##_d##d, load_tr_attention_bwd_dq_##dt##_d##d}

const BwdKernels& bwd_kernels_of(int i) {
  static const BwdKernels all[] = {BWD_LAUNCHERS(bf16, 64), BWD_LAUNCHERS(bf16, 128), BWD_LAUNCHERS(f16, 64),
                                   BWD_LAUNCHERS(f16, 128)};
  static_assert(sizeof(all) / sizeof(all[0]) == 4, "one set of launchers per dtype and head dim");
  return all[i];
}
#undef BWD_LAUNCHERS
#endif

void run_attention_bwd_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const Shape s = shape_of(l.problem);
  const int ki = bwd_kernel_index(l.problem);
  const BwdKernels& fn = bwd_kernels_of(ki);
  static bool loaded[4] = {false, false, false, false};
  if (!loaded[ki]) {
    klab::triton_prepare();
    fn.load_pre();
    fn.load_dkv();
    fn.load_dq();
    loaded[ki] = true;
  }
  const std::vector<std::string>& all = bwd_triton_names(s.d);
  for (int part = 0; part < 2; ++part) {
    const int linked = part == 0 ? fn.dkv_algos() : fn.dq_algos();
    const std::size_t named = distinct_halves(all, part).size();
    KLAB_REQUIRE(linked == static_cast<int>(named),
                 std::string("triton attention_bwd: the ") + (part == 0 ? "dK/dV" : "dQ") + " launcher links " +
                     std::to_string(linked) + " configurations, " + std::to_string(named) +
                     " named (the names follow CONFIGS in attention_bwd_triton.py)");
  }
  const auto ptr = [](const void* q) { return reinterpret_cast<CUdeviceptr>(q); };
  const CUstream stream = reinterpret_cast<CUstream>(l.stream);
  float* delta = static_cast<float*>(l.workspace);   // (B Hq Sq): D = dO · O
  float* lse2 = delta + bwd_rows_padded(l.problem);   // (B Hq Sq): L log2(e), +inf where L = -inf
  const i64 rows = s.B * s.Hq * s.Sq;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  const int causal = is_causal(l.problem) ? 1 : 0;
  const int32_t Hq = static_cast<int32_t>(s.Hq), Hkv = static_cast<int32_t>(s.Hkv);
  const int32_t Sq = static_cast<int32_t>(s.Sq), Sk = static_cast<int32_t>(s.Sk);
  const int32_t BH = static_cast<int32_t>(s.B * s.Hq), BHkv = static_cast<int32_t>(s.B * s.Hkv);
  // The candidates are a subset of the head dim's names; the launchers take the algo_ids of
  // the full list. Every candidate runs all three kernels: the preprocess is the same for all.
  const std::vector<std::string> names = attention_bwd_triton_candidates(l.problem);
  const auto launch = [&](int i) {
    KLAB_CHECK_CU(fn.pre(stream, ptr(l.in[3].data), ptr(l.in[4].data), ptr(l.in[5].data), ptr(delta), ptr(lse2), rows));
    KLAB_CHECK_CU(fn.dkv(stream, ptr(l.in[0].data), ptr(l.in[1].data), ptr(l.in[2].data), ptr(l.in[4].data),
                         ptr(l.out[1].data), ptr(l.out[2].data), ptr(lse2), ptr(delta), BHkv, Hq, Hkv, Sq, Sk, causal,
                         static_cast<float>(scale), static_cast<float>(scale * 1.4426950408889634),
                         algo_of(all, names.at(i), 0)));
    KLAB_CHECK_CU(fn.dq(stream, ptr(l.in[0].data), ptr(l.in[1].data), ptr(l.in[2].data), ptr(l.in[4].data),
                        ptr(l.out[0].data), ptr(lse2), ptr(delta), BH, Hq, Hkv, Sq, Sk, causal,
                        static_cast<float>(scale), static_cast<float>(scale * 1.4426950408889634),
                        algo_of(all, names.at(i), 1)));
  };
  const int best = klab::autotune(l, "attention_bwd|triton|" + l.problem.label(), names, 0, launch);
  launch(best);
#else
  (void)l;
  KLAB_REQUIRE(false, "triton attention_bwd: not built");
#endif
}

std::string supports_attention_bwd_triton(const klab::Problem& p) {
  if (std::string why = supports_head_dim(p); !why.empty()) return why;
  // One program per block of 64 keys (dK/dV) or 64 query rows (dQ; the preprocess's blocks
  // are of 64 flattened rows) of each (batch, head), on the grid's x axis (64: the smallest
  // BN and BM of the configurations); B x Hq is an int32 argument.
  const Shape s = shape_of(p);
  if (s.B * s.Hq > std::numeric_limits<int32_t>::max() ||
      s.B * s.Hkv * ((s.Sk + 63) / 64) > std::numeric_limits<int32_t>::max() ||
      s.B * s.Hq * ((s.Sq + 63) / 64) > std::numeric_limits<int32_t>::max())
    return "more than 2^31 - 1 programs of 64 rows";
  if (std::string why = klab::triton_supported(); !why.empty()) return why;
  if (attention_bwd_triton_candidates(p).empty())
    return "no tile configuration fits this device's " +
           std::to_string(klab::device_info().smem_per_block_optin / 1024) + " KB of shared memory a block";
  return "";
}

// Deterministic: each candidate sums in a fixed order (no atomics), and the autotuner's choice
// for a shape holds for the process; another process may choose another candidate, whose
// sums are ordered otherwise (`--candidate` fixes it).
KLAB_REGISTER(klab::register_impl({.op = "attention_bwd", .name = "triton",
                                   .summary = "Triton flash attention backward: D and L2 first, dK/dV by key "
                                              "blocks, dQ by query blocks (no atomics: deterministic), tl.dot "
                                              "(wgmma on Hopper), 4 linked tile pairs a head dim, fastest chosen "
                                              "per shape",
                                   .kind = klab::ImplKind::triton,
                                   .supports = supports_attention_bwd_triton,
                                   .workspace = [](const klab::Problem& p) {
                                     return static_cast<std::size_t>(2 * bwd_rows_padded(p)) * sizeof(float);
                                   },
                                   .run = run_attention_bwd_triton,
                                   .candidates = attention_bwd_triton_candidates,
                                   .deterministic = true}));

}  // namespace
}  // namespace lesson09
